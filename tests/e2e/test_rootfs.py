"""The rootfs preparation, without booting anything (runs everywhere, fast)."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

from .rootfs import prepare_rootfs


def test_prepared_rootfs_root_is_world_traversable(tmp_path):
    root = Path(tempfile.mkdtemp(dir=tmp_path))  # mode 0700, like the real build dir
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/apt/apt.conf.d").mkdir(parents=True)
    prepare_rootfs(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert (root / "etc/systemd/system/systemd-firstboot.service").resolve() == Path("/dev/null")
