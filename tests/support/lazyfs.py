"""LazyFS for the power-loss test: a FUSE file system that keeps unsynced writes in memory.

LazyFS (https://github.com/dsrhaslab/lazyfs, built from its source; never part of this
repository) passes every file operation through to a root directory, but keeps written
data in a page cache of its own until the file is fsynced. ``lazyfs::clear-cache`` on its
fault FIFO drops what was not synced, which is what a power cut does to the kernel's page
cache (killing a process drops nothing). ``BIRDDOG_LAZYFS`` names the ``lazyfs`` binary;
without it, or without FUSE, :func:`lazyfs_binary` says why the test is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support import eventually

ENV = "BIRDDOG_LAZYFS"
"""The environment variable naming the ``lazyfs`` binary (``.../lazyfs/build/lazyfs``)."""

CONFIG = """\
[faults]
fifo_path="{fifo}"
fifo_path_completed="{done}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="64mb"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile="{log}"
"""


def lazyfs_binary() -> tuple[Path | None, str]:
    """The ``lazyfs`` binary to use, or None and why the power-loss test cannot run here."""
    named = os.environ.get(ENV)
    if not named:
        return None, f"set {ENV} to a lazyfs binary built from its source to run it"
    binary = Path(named)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None, f"{ENV}={named} is not an executable file"
    if not Path("/dev/fuse").exists():
        return None, "no /dev/fuse here (FUSE is needed)"
    if shutil.which("fusermount3") is None:
        return None, "no fusermount3 here (the fuse3 package)"
    return binary, ""


class LazyFs:
    """One LazyFS mount of ``root`` on ``mount``, run as a child process of the test.

    Args:
        binary: the ``lazyfs`` binary.
        work: a directory of the test's for the config, the FIFOs and the log.
        root: the directory the data really lives in.
        mount: where the file system is mounted.
    """

    def __init__(self, binary: Path, work: Path, root: Path, mount: Path) -> None:
        self.binary = binary
        self.root = root
        self.mount = mount
        self.fifo = work / "faults.fifo"
        self.done = work / "done.fifo"
        self.log = work / "lazyfs.log"
        self.config = work / "lazyfs.toml"  # replaced by one in a directory of its own
        self.output = work / "lazyfs.out"
        self.process: subprocess.Popen[bytes] | None = None
        self._done_fd: int | None = None

    async def start(self) -> None:
        """Mount, and return once the mount is there."""
        for fifo in (self.fifo, self.done):
            fifo.unlink(missing_ok=True)  # LazyFS makes its FIFOs itself
        # lazyfs takes a --config-path holding "-o" (as /tmp/pytest-of-root/ does) for a
        # FUSE option and falls back to its default config: the file gets a plain path.
        self.config = Path(tempfile.mkdtemp(prefix="birddog_lazyfs_")) / "lazyfs.toml"
        assert "-o" not in str(self.config).lower(), f"lazyfs cannot take {self.config}"
        self.config.write_text(CONFIG.format(fifo=self.fifo, done=self.done, log=self.log))
        self.root.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        with self.output.open("ab") as output:
            # The binary the variable names; it runs until stop(), polled meanwhile.
            self.process = subprocess.Popen(  # noqa: S603, ASYNC220
                [
                    str(self.binary),
                    str(self.mount),
                    "--config-path",
                    str(self.config),
                    "-o",
                    "modules=subdir",
                    "-o",
                    f"subdir={self.root}",
                    "-f",
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        await eventually(self._mounted, f"LazyFS mounted on {self.mount}", within_s=30)
        # LazyFS's fault thread opens the completion FIFO for writing before it reads any
        # command, so it waits for this reader, kept open for the life of the mount.
        self._done_fd = await asyncio.wait_for(
            asyncio.to_thread(os.open, self.done, os.O_RDONLY), timeout=30
        )

    def _mounted(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"lazyfs exited: {self.output.read_text(errors='replace')}")
        return self.fifo.exists() and os.path.ismount(self.mount)

    async def clear_cache(self) -> None:
        """Drop every write not yet fsynced (the power cut), and wait until LazyFS did."""
        done = self._done_fd
        assert done is not None, "LazyFS is not started"

        def clear() -> str:
            with self.fifo.open("w") as faults:
                faults.write("lazyfs::clear-cache\n")
            return os.read(done, 4096).decode(errors="replace")  # its "finished" line

        said = await asyncio.wait_for(asyncio.to_thread(clear), timeout=60)
        assert "clear-cache" in said, said

    async def stop(self) -> None:
        """Unmount, then end the lazyfs process (by its pid) if unmounting did not."""
        process, self.process = self.process, None
        done, self._done_fd = self._done_fd, None
        if process is not None:
            await asyncio.to_thread(self._unmount, process, done)

    def _unmount(self, process: subprocess.Popen[bytes], done: int | None) -> None:
        try:
            if os.path.ismount(self.mount):
                subprocess.run(  # noqa: S603 - the FUSE tool on our own mount
                    ["fusermount3", "-u", str(self.mount)],  # noqa: S607
                    check=False,
                    capture_output=True,
                    timeout=30,
                )
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        finally:
            if done is not None:
                os.close(done)
            shutil.rmtree(self.config.parent, ignore_errors=True)
            if os.path.ismount(self.mount):  # a lazyfs killed before it unmounted
                subprocess.run(  # noqa: S603 - the FUSE tool on our own mount
                    ["fusermount3", "-u", "-z", str(self.mount)],  # noqa: S607
                    check=False,
                    capture_output=True,
                    timeout=30,
                )


@contextlib.asynccontextmanager
async def lazyfs(binary: Path, work: Path, root: Path, mount: Path) -> AsyncIterator[LazyFs]:
    """LazyFS mounted for the block, unmounted and stopped after it, whatever happened."""
    fs = LazyFs(binary, work, root, mount)
    try:
        await fs.start()
        yield fs
    finally:
        await fs.stop()
