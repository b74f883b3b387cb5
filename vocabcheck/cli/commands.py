"""Importing this module registers every command on the app."""

from . import demo, models  # noqa: F401
from . import run  # noqa: F401
from . import gate  # noqa: F401
from . import align  # noqa: F401
from . import bench  # noqa: F401
