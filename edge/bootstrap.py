"""First-run bootstrap: fresh tokens for placeholder hashes, so no secret ever sits in git.

The tracked default config carries placeholder hashes (no token hashes to them). Bootstrap gives
each such node and principal token a random token, stored untracked under `bootstrap_path`
(mode 0600), and writes the config to serve with the real hashes in place of the placeholders.
Tokens already generated are reused, and an existing output config is kept as it is (it is the
served config, which refresh applies edit), so running bootstrap again changes nothing.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from edge.config import EdgeConfig, load_config_text
from edge.tokens import sha256_hex

# A hash made of 48 leading zeros is a placeholder: finding a token for it is infeasible.
PLACEHOLDER_HASH = re.compile(r"0{48}[0-9a-f]{16}")


@dataclass
class BootstrapResult:
    config: EdgeConfig
    config_path: Path
    node_env_files: dict[str, Path] = field(default_factory=dict)
    client_token_files: dict[str, Path] = field(default_factory=dict)
    new_client_tokens: dict[str, str] = field(default_factory=dict)


def bootstrap(source: Path, output: Path, base_dir: Path) -> BootstrapResult:
    """Write ``output`` from ``source`` with placeholder hashes replaced by generated tokens.

    When ``output`` already exists it is validated and kept.
    """
    text = source.read_text(encoding="utf-8")
    config = load_config_text(text)
    artifacts = Path(config.edge.bootstrap_path)
    artifacts = artifacts if artifacts.is_absolute() else base_dir / artifacts
    artifacts.mkdir(mode=0o700, parents=True, exist_ok=True)  # tokens: the owner's only
    result = BootstrapResult(config=config, config_path=output)
    for node in config.nodes:
        if PLACEHOLDER_HASH.fullmatch(node.token_hash_sha256):
            env_file = artifacts / f"node-{node.id}.env"
            token, _ = token_in_file(env_file, prefix="IOP_NODE_TOKEN=")
            text = text.replace(node.token_hash_sha256, sha256_hex(token))
            result.node_env_files[node.id] = env_file
    for entry in config.openai.principal_tokens:
        if PLACEHOLDER_HASH.fullmatch(entry.token_hash_sha256):
            token_file = artifacts / f"client-{entry.token_ref}.token"
            token, created = token_in_file(token_file, prefix="")
            text = text.replace(entry.token_hash_sha256, sha256_hex(token))
            result.client_token_files[entry.token_ref] = token_file
            if created:
                result.new_client_tokens[entry.token_ref] = token
    if output.exists():
        result.config = load_config_text(output.read_bytes())
    else:
        result.config = load_config_text(text)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    return result


def token_in_file(path: Path, prefix: str = "") -> tuple[str, bool]:
    """The token stored in ``path``, generating and storing one (mode 0600) when absent.

    The file is created with its mode, never chmod-ed after: no moment where another user could
    open it. True with the token when it was created now.
    """
    if path.exists():
        return path.read_text(encoding="utf-8").strip().removeprefix(prefix), False
    token = f"iop_{secrets.token_urlsafe(32)}"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(f"{prefix}{token}\n")
    return token, True
