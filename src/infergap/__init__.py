"""infergap: find and close the gap between what an LLM inference host should deliver and what it does."""

__version__ = "0.1.0"
