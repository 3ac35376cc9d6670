"""Starts a thread that could outlive the call."""
import threading
