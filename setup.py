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
        # without debug information: 0.2 MB instead of 0.9
        [Extension("relay.transports._picows_lane", ["relay/transports/_picows_lane.pyx"], extra_compile_args=["-g0"])],
        build_dir="build/cython",   # the generated C stays out of the package (and its wheel)
        quiet=True,
    )
    for extension in extensions:   # set after: cythonize makes new Extensions and drops the flag
        extension.optional = True

setup(ext_modules=extensions)
