"""The Edge config core: plain Python, no Django (DESIGN §3)."""

from edge.config.errors import ConfigError, ConfigIssue
from edge.config.load import build_config, load_config_file, load_config_text
from edge.config.schema import EdgeConfig

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "EdgeConfig",
    "build_config",
    "load_config_file",
    "load_config_text",
]
