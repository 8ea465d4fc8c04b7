"""Reading a 64-bit little-endian ELF file (a linked library): its section names and the shared
libraries it links (DT_NEEDED). The build checks the extension links the shared libstdc++
(buildtools/toolchain.py); tests check it is stripped. Standard library only.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path


class ElfFile:
    """The section table of a 64-bit little-endian ELF file (what stripping keeps)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.data = Path(path).read_bytes()
        if self.data[:4] != b"\x7fELF" or self.data[4] != 2 or self.data[5] != 1:
            raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", self.data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", self.data, 0x3A)
        # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", self.data, shoff + i * shentsize)
                         for i in range(shnum)]
        self._names_at = self.sections[shstrndx][4]

    def string(self, offset: int) -> str:
        return self.data[offset:self.data.index(b"\0", offset)].decode()

    def section_names(self) -> list[str]:
        return [self.string(self._names_at + section[0]) for section in self.sections]

    def needed(self) -> list[str]:
        """The DT_NEEDED entries of the .dynamic section: the shared libraries it links."""
        needed = []
        for _, kind, _, _, offset, size, link, _, _, _ in self.sections:
            if kind != 6:  # SHT_DYNAMIC
                continue
            strings = self.sections[link][4]
            for entry in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", self.data, entry)
                if tag == 0:  # DT_NULL ends the table
                    break
                if tag == 1:  # DT_NEEDED: an offset into the linked string table
                    needed.append(self.string(strings + value))
        return needed


def elf_needed(path: str | os.PathLike) -> list[str]:
    """The shared libraries a 64-bit little-endian ELF file links (DT_NEEDED)."""
    return ElfFile(path).needed()
