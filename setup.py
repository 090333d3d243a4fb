"""The compiled parts: relay/dialects/_peek.pyx, the audio frames' test (needs nothing but
Cython), and relay/transports/_picows_lane.pyx, the picows transport's per-frame path (needs
picows too); everything else is in pyproject.toml. Optional extensions: where they cannot be built
(no C compiler, no Python headers) the package installs without them, and the relay runs their
Python paths, which take the same decisions (relay/dialects/peek.py,
relay/transports/picows_connection.py)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:   # a build without Cython (`--no-build-isolation` without it): no extension
    cythonize = None
try:
    from picows import __version__ as picows_version
except ImportError:   # without picows, the picows lane cannot be built
    picows_version = None

extensions = []
if cythonize is not None:
    wanted = [Extension("relay.dialects._peek", ["relay/dialects/_peek.pyx"], extra_compile_args=["-g0"])]
    if picows_version is not None:
        wanted.append(Extension("relay.transports._picows_lane", ["relay/transports/_picows_lane.pyx"],
                                # the picows it was built against: it calls picows' C methods by their place in
                                # picows' method table, which Cython does not check at import (picows_connection.py does)
                                define_macros=[("RELAY_PICOWS_BUILT_WITH", f'"{picows_version}"')],
                                extra_compile_args=["-g0"]))   # without debug information: 0.2 MB instead of 0.9
    extensions = cythonize(
        wanted,
        build_dir="build/cython",   # the generated C stays out of the package (and its wheel)
        quiet=True,
    )
    for extension in extensions:   # set after: cythonize makes new Extensions and drops the flag
        extension.optional = True

setup(ext_modules=extensions)
