"""The settings page: every field of `shoal.config.Settings`, as the environment variable that
sets it, with its type, default and description."""

from __future__ import annotations

from pydantic.fields import FieldInfo
from ref_text import GENERATED, code, default_text, field_type, summary, table

from shoal.config import Settings

PREFIX = Settings.model_config.get("env_prefix", "")


def variables(name: str, field: FieldInfo) -> str:
    """The variables that set the field: `SHOAL_NAME`, then any vendor's own."""
    names = [PREFIX + name.upper()]
    choices = getattr(field.validation_alias, "choices", [])
    names += [c for c in choices if isinstance(c, str) and c not in names]
    return ", ".join(code(n) for n in names)


def default(name: str, field: FieldInfo) -> str:
    if name == "instance_id":  # filled in when empty: say from what, not this machine's
        return "the host name and the data folder"
    return default_text(field)


def page() -> str:
    rows = [[variables(name, field), field_type(field, lambda t: t.__name__),
             default(name, field), field.description or ""]
            for name, field in Settings.model_fields.items()]
    return (
        "# Settings\n\n" + GENERATED + "\n" + summary(Settings) +
        " Each is read from the environment variable named here, or from a `.env` file in "
        "the folder Shoal starts in; a list is written as JSON (`SHOAL_RETRY_DELAYS='[5, "
        "30]'`). Outside dev mode (`SHOAL_MODE=dev`) Shoal refuses to start with an unsafe "
        "default, such as the development `SHOAL_SECRET_KEY`.\n\n"
        + table(["Variable", "Type", "Default", "What it sets"], rows))
