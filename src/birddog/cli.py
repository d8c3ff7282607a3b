"""The birddog command line."""


def main() -> None:
    """Run the command line."""
