"""Deferrable triggers: async, serializable, bounded polls of a checkpoint."""
