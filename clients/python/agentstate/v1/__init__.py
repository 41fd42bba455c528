"""Generated from proto/agentstate/v1 by scripts/generate.py. DO NOT EDIT."""
