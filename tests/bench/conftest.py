"""The bench runs the prefetch engine: its tests share the engine's thread-leak check."""

from tests.prefetch.conftest import no_thread_leaks  # noqa: F401  (an autouse fixture)
