"""``python -m shadoweval.cli``: the same as the ``shadow-eval`` console script."""

from shadoweval.cli import main

if __name__ == "__main__":
    main()
