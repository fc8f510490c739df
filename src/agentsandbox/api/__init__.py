"""The agent-sandbox API: kinds, keys, hashes, conditions and object builders."""
