"""Console script entry point."""

from skillopt.cli.app import app, main  # noqa: F401

if __name__ == "__main__":
    main()
