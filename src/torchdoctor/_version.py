"""The package version, on the ground floor: any module may import it without importing the
package's entry points (``torchdoctor/__init__.py`` re-exports it)."""

__version__ = "0.1.0"
