"""Google Cloud credentials for a submission: found, then refreshed before anything is sent.

The aiplatform SDK refreshes credentials lazily, inside its first call. For a PipelineJob that is
the pipeline root's bucket check, whose Cloud Storage client retries a failed refresh for 120 s
and then logs the error's traceback and goes on to the create call. Offline (a laptop on a train,
a VPN down) a submit spent about two minutes before it failed. Refreshing here fails at once, in
one line that says what could not be reached.
"""

from __future__ import annotations

import os
import stat
from typing import Any

AUTH_FIX = (
    "run `gcloud auth application-default login` (or point GOOGLE_APPLICATION_CREDENTIALS at a "
    "service account key file)"
)
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class NoCredentialsError(RuntimeError):
    """No usable Google Cloud credentials; the message says how to log in."""


class SignInUnreachableError(RuntimeError):
    """The credentials' token service could not be reached to refresh them (the network)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def failed(exc: BaseException, hint: str = AUTH_FIX) -> NoCredentialsError:
    """The error for credentials that stopped working after :func:`ready` (a token mid-way)."""
    return NoCredentialsError(f"Google Cloud credentials failed ({exc}): {hint}")


def _check_key_file(path: str) -> None:
    """Refuse a ``GOOGLE_APPLICATION_CREDENTIALS`` that google.auth would read for ever.

    google.auth reads the file whole: a named pipe nobody writes to held the command for ever,
    /dev/zero until memory ran out. A missing file or one that is no key is google.auth's to
    refuse (``DefaultCredentialsError``).
    """
    if not path:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise NoCredentialsError(
            f"no usable Google Cloud credentials (GOOGLE_APPLICATION_CREDENTIALS={path} is not "
            f"a regular file): {AUTH_FIX}"
        )


def ready(credentials: Any = None) -> Any:
    """``credentials`` (default: application default credentials), holding a current token.

    Raises:
        NoCredentialsError: no login was found, or the token service refused it.
        SignInUnreachableError: the token service could not be reached.
    """
    import google.auth
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    if credentials is None:
        _check_key_file(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", ""))
    try:
        if credentials is None:
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        if not credentials.valid:
            credentials.refresh(Request())
    except (exceptions.DefaultCredentialsError, exceptions.RefreshError) as exc:
        raise NoCredentialsError(
            f"no usable Google Cloud credentials ({_first_line(exc)}): {AUTH_FIX}"
        ) from None
    except exceptions.TransportError as exc:
        raise SignInUnreachableError(
            f"cannot reach Google's sign-in service to refresh the credentials "
            f"({_first_line(exc)}): is the network up? Nothing was sent"
        ) from None
    return credentials
