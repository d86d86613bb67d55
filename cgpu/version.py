"""cgpu's version, in a module of its own: every module may import it without importing the
package face (`cgpu/__init__.py`), which sits above them all."""

__version__ = "0.1.0"
