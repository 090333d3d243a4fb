"""The one compiled part: relay/transports/_picows_lane.pyx, the picows transport's per-frame path
(everything else is in pyproject.toml). An optional extension: where it cannot be built (no C
compiler, no Python headers) the package installs without it, and the transport runs its Python
path, which takes the same decisions (relay/transports/picows_connection.py)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
    from picows import __version__ as picows_version
except ImportError:   # a build without Cython or picows (`--no-build-isolation` without them): no extension
    extensions = []
else:
    extensions = cythonize(
        [Extension("relay.transports._picows_lane", ["relay/transports/_picows_lane.pyx"],
                   # the picows it was built against: it calls picows' C methods by their place in
                   # picows' method table, which Cython does not check at import (picows_connection.py does)
                   define_macros=[("RELAY_PICOWS_BUILT_WITH", f'"{picows_version}"')],
                   extra_compile_args=["-g0"])],   # without debug information: 0.2 MB instead of 0.9
        build_dir="build/cython",   # the generated C stays out of the package (and its wheel)
        quiet=True,
    )
    for extension in extensions:   # set after: cythonize makes new Extensions and drops the flag
        extension.optional = True

setup(ext_modules=extensions)
