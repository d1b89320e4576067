"""The CUDA fat binaries embedded in an ELF shared object, read from their headers alone.

A library compiled by nvcc (or clang) carries its device code in the ELF section
``.nv_fatbin``: one *fatbin* per compilation unit (plus one per device link), each holding
entries — SASS cubins for a GPU (``sm_90a``) and PTX for the driver to JIT-compile
(``compute_100``). The ELF is read with pyelftools (header, section headers, section names);
inside ``.nv_fatbin`` only the 16-byte fatbin headers and the 64-byte-plus entry headers are
read: payloads (the cubins and PTX, most of a multi-GB library) are skipped with a seek, and
targets are read from entry headers, compressed or not. One exception, asked for only about
fatbins that have no code for the audited arch: whether a cubin defines any kernel at all
(device-link stubs and data-only modules define none) is read from the cubin's own section
names, decompressing it first (zstd, LZ4) when it is small.

Layout (little-endian; as nvcc 13.0 writes it, checked on the fixtures in
tests/fixtures/cuda/ against ``cuobjdump --list-elf/--list-ptx``):

- fatbin header, 16 bytes: ``u32 magic 0xBA55ED50, u16 version, u16 header size,
  u64 size of the entries that follow``;
- entry header (header size >= 64): ``u16 kind (1 PTX, 2 ELF cubin, 8 LTO-IR), u16 version,
  u32 header size, u64 payload size (padded), u32 compressed size, u32 -, u16 minor,
  u16 major (PTX ISA version for PTX), u32 sm (90, 100, 120), u32 name offset, u32 name
  length, u64 flags, u64 -, u64 uncompressed size``; then the payload;
- flags: 0x1 64-bit, 0x2 debug, 0x10 Linux, 0x2000 LZ4-compressed, 0x8000 zstd-compressed,
  0x100000 arch-specific target (``sm_90a``), 0x200000 family-specific target (``sm_100f``).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTION = ".nv_fatbin"
_FATBIN_HEADER = struct.Struct("<IHHQ")
_ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes
KINDS = {1: "ptx", 2: "sass", 8: "lto-ir"}
FLAG_DEBUG = 0x2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
STUB_LIMIT = 8 << 10  # compressed cubins up to this size are opened to look for kernels (a stub is ~2 KB)
ALIGN = 8  # fatbins in the section start on 8-byte boundaries (zero padding between)


class FatbinError(ValueError):
    """Bytes in ``.nv_fatbin`` that are not a fatbin this reader understands."""


@dataclass(frozen=True)
class Entry:
    kind: str  # "sass" | "ptx" | "lto-ir" | "kind-N"
    sm: int  # 90, 100, 120
    variant: str  # "" | "a" (arch-specific) | "f" (family-specific)
    compression: str | None  # None | "lz4" | "zstd"
    size: int  # payload bytes as stored
    isa: str | None = None  # PTX ISA version ("9.0"), PTX entries only
    debug: bool = False
    offset: int = field(default=0, compare=False)  # file offset of the payload
    stored: int = field(default=0, compare=False)  # compressed bytes (0: not compressed)
    uncompressed: int = field(default=0, compare=False)  # size once decompressed

    @property
    def target(self) -> str:
        """The target as nvcc and torch spell it: ``sm_90a`` (SASS), ``compute_100`` (PTX)."""
        prefix = "compute" if self.kind == "ptx" else ("sm" if self.kind == "sass" else self.kind)
        return f"{prefix}_{self.sm}{self.variant}"

    @property
    def loadable(self) -> bool:
        """The driver can load it (SASS) or JIT it (PTX); LTO-IR needs a device link first."""
        return self.kind in ("sass", "ptx")

    def to_json(self) -> dict:
        doc = {"kind": self.kind, "target": self.target, "compression": self.compression, "size": self.size}
        if self.isa:
            doc["isa"] = self.isa
        if self.debug:
            doc["debug"] = True
        return doc


@dataclass
class Module:
    """One fatbin: the device code of one compilation unit (or one device link)."""

    offset: int  # file offset of its header
    entries: list[Entry] = field(default_factory=list)

    @property
    def targets(self) -> list[str]:
        return sorted({e.target for e in self.entries if e.loadable}, key=target_sort_key)


@dataclass
class FatbinScan:
    modules: list[Module]
    section_bytes: int  # size of .nv_fatbin (what a whole read would have cost)
    reader: "_Counting"

    @property
    def bytes_read(self) -> int:
        """Bytes read from the file so far (ELF, fatbin and cubin headers)."""
        return self.reader.count

    def defines_kernels(self, entry: Entry) -> bool | None:
        """Whether a SASS cubin defines any kernel (a ``.text.<kernel>`` section name in the
        cubin's own section-name table), or None when that is not looked at. Compressed
        cubins are decompressed for this only when small (a device-link stub, which nvcc
        -shared adds, or a data-only module is a few KB); larger ones are taken to define
        kernels. The audit asks only about fatbins that have no code for the arch."""
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        if entry.kind != "sass":
            return None
        try:
            if entry.compression:
                if not 0 < entry.uncompressed <= STUB_LIMIT or not entry.stored:
                    return None
                self.reader.seek(entry.offset)
                data = _decompress(entry.compression, self.reader.read(entry.stored), entry.uncompressed)
                if data is None:
                    return None
                cubin = ELFFile(io.BytesIO(data))
            else:
                cubin = ELFFile(_Window(self.reader, entry.offset, entry.size))
            index = cubin.get_shstrndx()
            if not index or index >= cubin.num_sections():
                return None
            return b".text." in cubin.get_section(index).data()
        except (ELFError, ValueError, OSError):
            return None


def _decompress(method: str, data: bytes, size: int) -> bytes | None:
    """zstd frames (``zstandard``) or raw LZ4 blocks (``lz4``), as fatbinary writes them."""
    try:
        if method == "zstd":
            import zstandard

            return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        if method == "lz4":
            import lz4.block

            return lz4.block.decompress(data, uncompressed_size=size)
    except ImportError:
        return None
    except Exception:  # zstandard.ZstdError, lz4's LZ4BlockError: not a stub we can read
        return None
    return None


def target_sort_key(token: str) -> tuple:
    kind, _, rest = token.partition("_")
    digits = "".join(ch for ch in rest if ch.isdigit())
    return (kind != "sm", int(digits or 0), rest)


class _Window:
    """A read-only view of ``size`` bytes at ``start`` of a file (an embedded cubin)."""

    def __init__(self, fh, start: int, size: int):
        self._fh, self._start, self._size, self._pos = fh, start, size, 0

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._pos if n is None or n < 0 else min(n, self._size - self._pos)
        self._fh.seek(self._start + self._pos)
        data = self._fh.read(max(n, 0))
        self._pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else (self._pos + pos if whence == 1 else self._size + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos


class _Counting:
    """A read-only file wrapper that counts the bytes read (the benchmark reports them)."""

    def __init__(self, fh: BinaryIO):
        self._fh, self.count = fh, 0

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.count += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._fh.seek(pos, whence)

    def tell(self) -> int:
        return self._fh.tell()


def is_elf(head: bytes) -> bool:
    return head[:4] == b"\x7fELF"


def read_fatbins(fh: BinaryIO) -> FatbinScan:
    """Every fatbin of an ELF file opened for binary reading (seekable).

    Raises ``elftools.common.exceptions.ELFError`` for a malformed ELF and
    :class:`FatbinError` for a ``.nv_fatbin`` it cannot walk."""
    from elftools.elf.elffile import ELFFile

    counted = _Counting(fh)
    elf = ELFFile(counted)
    modules: list[Module] = []
    start, total = _fatbin_section(elf, counted)
    if total:
        modules = _walk(counted, start, start + total)
    return FatbinScan(modules, total, counted)


def _fatbin_section(elf, fh) -> tuple[int, int]:
    """(file offset, size) of ``.nv_fatbin``, or (0, 0). Reads the section-name string table
    first (most shared objects have no fatbin and stop there), then the section headers
    one by one through pyelftools' own structs: ``iter_sections``/``get_section_by_name``
    would build every section (parsing a GNU hash table alone costs milliseconds)."""
    from elftools.common.utils import struct_parse

    shstrndx = elf.get_shstrndx()
    if not shstrndx or shstrndx >= elf.num_sections():
        return 0, 0
    names = elf.get_section(shstrndx)
    if FATBIN_SECTION.encode() + b"\0" not in names.data():
        return 0, 0
    for index in range(elf.num_sections()):
        header = struct_parse(elf.structs.Elf_Shdr, fh, elf["e_shoff"] + index * elf["e_shentsize"])
        if header["sh_type"] != "SHT_NOBITS" and names.get_string(header["sh_name"]) == FATBIN_SECTION:
            return header["sh_offset"], header["sh_size"]
    return 0, 0


def _walk(fh, pos: int, end: int) -> list[Module]:
    modules = []
    while pos + _FATBIN_HEADER.size <= end:
        fh.seek(pos)
        head = fh.read(_FATBIN_HEADER.size)
        if len(head) < _FATBIN_HEADER.size:
            raise FatbinError(f"{FATBIN_SECTION} is cut short at offset {pos:#x}")
        magic, _version, header_size, body = _FATBIN_HEADER.unpack(head)
        if magic != FATBIN_MAGIC:
            if head.strip(b"\0"):
                raise FatbinError(f"no fatbin header at offset {pos:#x} of {FATBIN_SECTION} (magic {magic:#010x})")
            pos += ALIGN  # zero padding between fatbins
            continue
        if header_size < _FATBIN_HEADER.size or pos + header_size + body > end:
            raise FatbinError(f"fatbin at offset {pos:#x} overruns {FATBIN_SECTION}")
        module = Module(pos)
        entry_pos, module_end = pos + header_size, pos + header_size + body
        while entry_pos + _ENTRY_HEADER.size <= module_end:
            fh.seek(entry_pos)
            entry, entry_size = _entry(fh.read(_ENTRY_HEADER.size), entry_pos)
            if entry_pos + entry_size > module_end:
                raise FatbinError(f"fatbin entry at offset {entry_pos:#x} overruns its fatbin")
            module.entries.append(entry)
            entry_pos += entry_size
        modules.append(module)
        pos = module_end + (-module_end) % ALIGN
    return modules


def _entry(raw: bytes, offset: int) -> tuple[Entry, int]:
    if len(raw) < _ENTRY_HEADER.size:
        raise FatbinError(f"fatbin entry at offset {offset:#x} is cut short")
    (kind, _version, header_size, payload, compressed, _, minor, major, sm, _name_off, _name_len,
     flags, _, uncompressed) = _ENTRY_HEADER.unpack(raw)
    if header_size < _ENTRY_HEADER.size or not 10 <= sm <= 999:
        raise FatbinError(f"fatbin entry at offset {offset:#x} has a header this reader does not know "
                          f"(header size {header_size}, sm {sm})")
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY_SPECIFIC else "")
    compression = "zstd" if flags & FLAG_ZSTD else ("lz4" if flags & FLAG_LZ4 else None)
    name = KINDS.get(kind, f"kind-{kind}")
    isa = f"{major}.{minor}" if name == "ptx" else None
    entry = Entry(name, sm, variant, compression, payload, isa, bool(flags & FLAG_DEBUG), offset + header_size,
                  compressed if compression else 0, uncompressed if compression else payload)
    return entry, header_size + payload
