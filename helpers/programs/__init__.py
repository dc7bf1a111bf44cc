"""Commands that measure and write reports: ``bench`` (``make bench``), ``gpu_reference``
(``make gpu-reference``) and its measuring checks, ``gpu_checks``."""
