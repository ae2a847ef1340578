"""optuna-dashboard over the store's database (the tuning studies beside the runs), on 127.0.0.1.

The dashboard is started in this process on ``ablate tune``'s own storage object: its command line would open
the database with Optuna's schema check, which reads ablate's Alembic revision and refuses (see
``storage.py``).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import TYPE_CHECKING

from ablate.errors import UserInputError
from ablate.tune.storage import optuna_storage

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)

INSTALL = "pip install 'ablate[dashboard]'"  # the extra pins optuna-dashboard (constraints.txt)


def dashboard_module() -> ModuleType:
    """The ``optuna_dashboard`` module, or a UserInputError saying how to install it."""
    try:
        import optuna_dashboard
    except ImportError:
        raise UserInputError(f"optuna-dashboard is not installed; install it with `{INSTALL}` (or `pip "
                             "install optuna-dashboard`, in ablate's environment), then run `ablate tune "
                             "--dashboard` again") from None
    module: ModuleType = optuna_dashboard
    return module


def serve(store: Store, *, port: int = 8080) -> None:
    """Serve optuna-dashboard for an open ablate ``Store`` on http://127.0.0.1:``port`` until interrupted."""
    module = dashboard_module()
    module.run_server(optuna_storage(store.url), host="127.0.0.1", port=port)
