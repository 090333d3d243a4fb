"""The one compiled part: relay/transports/_picows_lane.pyx, the picows transport's per-frame path
(everything else is in pyproject.toml). An optional extension: where it cannot be built (no C
compiler, no Python headers) the package installs without it, and the transport runs its Python
path, which takes the same decisions (relay/transports/picows_connection.py)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:   # a build without Cython (`--no-build-isolation` without it): no extension
    extensions = []
else:
    extensions = cythonize(
        [Extension("relay.transports._picows_lane", ["relay/transports/_picows_lane.pyx"], optional=True)],
        compiler_directives={"language_level": 3},
        quiet=True,
    )

setup(ext_modules=extensions)
