"""The data errors every input module raises."""


class DataError(ValueError):
    """Bad data input; str(e) is ONE line naming the problem and the fix."""
