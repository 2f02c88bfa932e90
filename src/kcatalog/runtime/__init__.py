"""The runtime: the one mutable part of a catalog (room.py), and the pieces it hands narrow callables to."""
