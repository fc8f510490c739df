"""Logging configured from controller-runtime's ``--zap-*`` flags.

Production (default): JSON lines on stderr, info level, epoch timestamps — what zap's production
config prints, so log pipelines built for the Go controller keep working. ``--zap-devel``: a
human-readable console format at debug level.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import traceback

import orjson

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "error": logging.ERROR,
    "panic": logging.CRITICAL,
    "warn": logging.WARNING,
    "dpanic": logging.CRITICAL,
}
_STD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _level(text: str, devel: bool) -> int:
    if not text:
        return logging.DEBUG if devel else logging.INFO
    if text in _LEVELS:
        return _LEVELS[text]
    try:
        verbosity = int(text)
    except ValueError:
        raise ValueError(f'--zap-log-level: unknown level "{text}"') from None
    return logging.DEBUG if verbosity > 0 else logging.INFO


def _time(created: float, encoding: str) -> object:
    if encoding in ("", "epoch"):
        return created
    if encoding == "millis":
        return created * 1000
    if encoding == "nano":
        return int(created * 1e9)
    stamp = dt.datetime.fromtimestamp(created, dt.UTC)
    if encoding == "rfc3339":
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return stamp.isoformat().replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    def __init__(self, time_encoding: str = "") -> None:
        super().__init__()
        self.time_encoding = time_encoding

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "level": record.levelname.lower().replace("warning", "warn"),
            "ts": _time(record.created, self.time_encoding),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["stacktrace"] = "".join(traceback.format_exception(*record.exc_info))
        return orjson.dumps(entry, default=str).decode()


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%H:%M:%S.%f")[:-3]
        extras = {
            k: v for k, v in vars(record).items() if k not in _STD_ATTRS and not k.startswith("_")
        }
        tail = " " + orjson.dumps(extras, default=str).decode() if extras else ""
        line = f"{stamp}\t{record.levelname}\t{record.name}\t{record.getMessage()}{tail}"
        if record.exc_info and record.exc_info[0] is not None:
            line += "\n" + "".join(traceback.format_exception(*record.exc_info))
        return line


def configure(devel: bool, encoder: str, level: str, time_encoding: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    use_console = encoder == "console" or (devel and encoder == "")
    handler.setFormatter(ConsoleFormatter() if use_console else JsonFormatter(time_encoding))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_level(level, devel))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
