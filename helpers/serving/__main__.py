"""``python -m helpers.serving``: see ``helpers.serving.bench.main``."""

from helpers.serving.bench import main

main()
