"""quco as an HTTP service: ``create_app`` (FastAPI), its settings, and the trace viewer page."""

from quco.serve.service import AnswerService, ServeSettings
from quco.serve.viewer import viewer_html


def create_app(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - re-exported lazily: FastAPI is an extra
    """See ``quco.serve.app.create_app``."""
    from quco.serve.app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["AnswerService", "ServeSettings", "create_app", "viewer_html"]
