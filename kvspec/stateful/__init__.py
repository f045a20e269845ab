"""The stateful machine: a real KVCacheManager driven as its scheduler would, and its judges."""
