"""The handoff script installed in a scratch directory for the unit tests that run it
(tests/unit/slurm_hooks/test_handoff_script.py, the epilog; tests/unit/slurm_hooks/test_handoff_prolog.py, the prolog):
the script in ``etc`` next to its configuration file, fake Slurm tools in ``fake``."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm-hooks" / "slurm-bridge-handoff.sh"


@dataclass
class HandoffRoot:
    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def fake(self) -> Path:
        return self.root / "fake"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm-bridge-handoff.conf"

    def write_conf(self, text: str, mode: int = 0o644) -> None:
        self.conf.write_text(text)
        os.chmod(self.conf, mode)

    def install(self, fakes: dict[str, str]) -> None:
        """The script (executable) and the fakes, ``{d}`` in each replaced by the fakes' directory."""
        self.etc.mkdir()
        self.fake.mkdir()
        shutil.copy(SCRIPT, self.etc / SCRIPT.name)
        os.chmod(self.etc / SCRIPT.name, 0o755)
        for name, text in fakes.items():
            (self.fake / name).write_text(text.replace("{d}", shlex.quote(str(self.fake))))
            os.chmod(self.fake / name, 0o755)
