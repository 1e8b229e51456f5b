"""The one error type domain code raises; the CLI turns it into a clean message."""


class ObservatoryError(Exception):
    """A problem the user can fix; the message says what and how."""


class ProbeFileError(ObservatoryError):
    """A probe file that does not load strictly."""


class ArmError(ObservatoryError):
    """An arm specification that cannot be launched."""


class RequestTimeout(ObservatoryError):
    """A request that did not finish within the request timeout (a server dripping tokens forever)."""
