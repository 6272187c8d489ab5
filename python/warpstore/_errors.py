"""What the errors warpstore raises say besides their message.

They are the built-in exceptions (IndexError, OSError and its subclasses,
ValueError, RuntimeError), each with these attributes, None where not known:

``kind``      what went wrong, a word: ``"io"``, ``"deadline"``,
              ``"index_out_of_range"``, ``"file"``, ``"invalid_argument"``,
              ``"invalid_state"``, ``"corrupt"``, ``"no_space"``,
              ``"runtime"``, ``"cancelled"`` (the C++ ``warpstore::error_kind``)
``path``      the file (an OSError's ``filename`` too)
``index``     the index asked for; for a failed read, the element of the
              file the cache was reading
``row``       the row of the array that failed
``position``  where in the index tensor the bad index was
``lba``       first 512-byte block of the failed command
``offset``    byte offset in the file of the failed command (or argument)
``status``    the failed command's NVMe status (raw 16-bit value: bits 7:0
              status code, 10:8 status code type)
``count``     errors seen; the message describes the first
"""

FIELDS = ("kind", "path", "index", "row", "position", "lba", "offset", "status", "count")


def with_fields(exc, **fields):
    """Sets every field on `exc`: from `fields`, else what it has, else None."""
    for name in FIELDS:
        if name in fields:
            setattr(exc, name, fields[name])
        elif not hasattr(exc, name):
            setattr(exc, name, None)
    return exc


def index_error(path, index, rows, position=None):
    """IndexError for `index` (at `position` of the indices) of an array of `rows` rows."""
    at = "" if position is None else f" (at position {position})"
    return with_fields(IndexError(f"{path}: index {index}{at} is out of range for {rows} rows"),
                       kind="index_out_of_range", path=path, index=index, row=index,
                       position=position, count=1)


def read_error_fields(error, row_bytes, word_bytes):
    """Adds the row to a failed read's error (the extension knows the
    element, the array knows its rows)."""
    index = getattr(error, "index", None)
    row = None if index is None else index * word_bytes // row_bytes
    return with_fields(error, row=row)
