"""``python -m faces.cli``: the same as the ``shadow-eval`` console script."""

from faces.cli import main

if __name__ == "__main__":
    main()
