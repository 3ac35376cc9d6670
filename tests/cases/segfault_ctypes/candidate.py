"""ctypes is refused before anything runs."""
import ctypes

ctypes.string_at(0)
