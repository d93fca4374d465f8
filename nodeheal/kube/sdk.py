"""The parts of the ``kubernetes`` package NodeHeal's adapters use, without its eager package init.

``kubernetes/__init__.py`` imports every subpackage (config with its kubeconfig and exec-plugin
machinery, dynamic with kubernetes_validate and jsonschema, watch, stream, leaderelection,
informer): about 0.3 s of a Lambda cold start, for code the remediation tasks never call. The
adapters need only the client's transport (``ApiClient``, ``Configuration``, ``ApiException``),
whose own package (``kubernetes.client``) already loads its thousands of models lazily.

So, when nothing has imported ``kubernetes`` yet, the package is registered with its real spec and
search path but without running its ``__init__``; submodule imports work as usual, and the first
access to an attribute the package would have defined (``kubernetes.config``,
``kubernetes.__version__``...) runs the real ``__init__`` then, so other users of the package in
the same process (the exporter, the simulation, tests) see the complete package.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

_PACKAGE = "kubernetes"
_init_lock = threading.RLock()


class _DeferredPackage(types.ModuleType):
    """A package module whose ``__init__`` code runs on the first miss of an attribute lookup."""

    _nodeheal_initialized = False

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not in the module's namespace (PEP 562 semantics for a class).
        if name.startswith("__") and name.endswith("__") and name not in ("__version__", "__project__"):
            raise AttributeError(name)
        with _init_lock:
            if not self._nodeheal_initialized:
                self._nodeheal_initialized = True
                spec = self.__spec__
                assert spec is not None and spec.loader is not None
                spec.loader.exec_module(self)
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def _register_deferred_package() -> None:
    with _init_lock:
        if _PACKAGE in sys.modules:
            return
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            return  # not installed as a regular package: let the ordinary import report it
        module = _DeferredPackage(_PACKAGE)
        module.__spec__ = spec
        module.__file__ = spec.origin
        module.__path__ = list(spec.submodule_search_locations)
        module.__package__ = _PACKAGE
        module.__loader__ = spec.loader
        sys.modules[_PACKAGE] = module


_register_deferred_package()

from kubernetes.client.api_client import ApiClient  # noqa: E402
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

__all__ = ["ApiClient", "ApiException", "Configuration"]
