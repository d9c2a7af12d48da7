"""The secrets directory: one file per secret, named as its environment variable.

The secrets directory: one file per secret, named as its environment variable, the layout
pydantic-settings' ``secrets_dir`` reads and Docker and Kubernetes mount (``/run/secrets``).

``REAPER_SECRETS_DIR`` names the directory; else ``/run/secrets`` is read when it exists. Only
the secret keys are looked for there (``reaper_bus__password``, ``reaper_database__password``,
any case), so another program's secrets beside them are never opened. A file that cannot be
read is a problem naming its path, never its content. The environment and a ``password_file``
win over the directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic_core import PydanticCustomError

from reaper.config.connections import read_secret_file
from reaper.config.sources import ENV_DELIMITER, ENV_PREFIX, KeyPath

__all__ = ["DEFAULT_SECRETS_DIR", "SECRETS_DIR_VARIABLE", "SecretsDir", "read_secrets_dir"]

SECRETS_DIR_VARIABLE: Final = "REAPER_SECRETS_DIR"
DEFAULT_SECRETS_DIR: Final = Path("/run/secrets")
#: The keys a secrets directory may hold.
SECRET_PATHS: Final = (("bus", "password"), ("database", "password"))


@dataclass
class SecretsDir:
    """What a secrets directory holds for the reaper: the values as nested tables, the file
    each came from, and every problem met."""

    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[KeyPath, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def file_name(path: KeyPath) -> str:
    """The file that holds ``path``: its environment variable's name, lower case."""
    return (ENV_PREFIX + ENV_DELIMITER.join(path)).lower()


def read_secrets_dir(
    environ: Mapping[str, str], taken: Mapping[KeyPath, bool] | None = None
) -> SecretsDir:
    """Read the secrets directory in force. ``taken`` names the keys already set by the
    environment or a ``password_file``: those files are not read."""
    named = environ.get(SECRETS_DIR_VARIABLE)
    found = SecretsDir()
    if named:
        directory = Path(named)
        if not directory.is_dir():
            why = "is not a directory" if directory.exists() else "does not exist"
            found.problems.append(f"{SECRETS_DIR_VARIABLE} {directory} {why}")
            return found
    elif DEFAULT_SECRETS_DIR.is_dir():
        directory = DEFAULT_SECRETS_DIR
    else:
        return found
    found.path = directory
    try:
        names = {p.name.lower(): p for p in directory.iterdir()}
    except OSError as exc:
        found.problems.append(
            f"the secrets directory {directory} cannot be listed: "
            f"{exc.strerror or type(exc).__name__}"
        )
        return found
    for key in SECRET_PATHS:
        file = names.get(file_name(key))
        if file is None or (taken or {}).get(key):
            continue
        try:
            secret = read_secret_file(str(file), "the secrets directory's file")
        except PydanticCustomError as exc:
            found.problems.append(exc.message())
            continue
        found.values.setdefault(key[0], {})[key[1]] = secret
        found.origins[key] = f"secret:{file}"
    return found
