"""The one error type domain code raises; the CLI turns it into a clean message."""


class ObservatoryError(Exception):
    """A problem the user can fix; the message says what and how."""


class ProbeFileError(ObservatoryError):
    """A probe file that does not load strictly."""


class ArmError(ObservatoryError):
    """An arm specification that cannot be launched."""


class RequestTimeout(ObservatoryError):
    """A request that did not finish within the request timeout (a server dripping tokens forever)."""


class NotReported(ObservatoryError):
    """What the engine does not expose for this request (completions without ids, on an engine whose adapter
    reads ids outside the logprobs: `observatory.engines`): the
    request is stored as failed with NOT_REPORTED in front, and a channel whose base answers so is SKIP
    ("not measurable"), never a verdict made up from nothing."""


NOT_REPORTED = "not reported by this engine"  # the stored error's prefix for a `NotReported` answer
