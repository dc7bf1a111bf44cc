"""What every chapter and the tools around it share: ``notebook`` (``setup()``, each chapter's
first call), ``checks`` (what test cells call) and ``stored_outputs`` (a notebook's outputs
made stable)."""
