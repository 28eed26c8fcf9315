"""The compiled record paths (issue 24): Cython extensions, each optional.

The project's metadata is in setup.cfg; this file only adds the extension modules, the
compiled twins of pure-Python per-record code (``segments/record/accel.py`` says which and
how the pure-Python twin takes over; ``shm_ring/accel.py`` for the ring's per-frame paths).
``pip install -e .`` builds them in place (Cython comes from pyproject.toml's build
requirements); a machine without a C compiler — or without Cython — still installs: the
build says why it skipped them, once, and ringlog runs the pure-Python paths (saying so
once per process). ``python setup.py build_ext --inplace`` rebuilds them in a checkout.
"""
from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: module name -> its .pyx source (the .c and .so next to it are build outputs, ignored).
EXTENSIONS = {
    "segments.record._builder_core": "segments/record/_builder_core.pyx",
    "consumer_proc._records_accel": "consumer_proc/_records_accel.pyx",
    "cluster.producer._lane_accel": "cluster/producer/_lane_accel.pyx",  # cimports the first
    "shm_ring._ring_accel": "shm_ring/_ring_accel.pyx",  # the ring's per-frame paths
}


_SAID = []


def _say(message):
    _SAID.append(message)
    print(f"ringlog: {message}; ringlog will run its pure-Python record paths (slower)",
          file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a module that does not compile is left out."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all: distutils' errors vary by platform
            if not _SAID:  # else a module's failure was said, and this is its consequence
                _say(f"the compiled record paths were not built ({type(exc).__name__}: {exc})")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            _say(f"{ext.name} was not built ({type(exc).__name__}: {exc})")


def _extensions():
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        _say(f"Cython is not installed ({exc})")
        return []
    modules = [Extension(name, [source], optional=True)
               for name, source in EXTENSIONS.items()]
    try:
        return cythonize(modules, compiler_directives={"language_level": "3"}, quiet=True)
    except Exception as exc:
        _say(f"Cython could not translate the extensions ({type(exc).__name__}: {exc})")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
