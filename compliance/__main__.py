"""``python -m compliance``: same as the ``compliance`` console script."""

from compliance.cli.entry import main

if __name__ == "__main__":
    main()
