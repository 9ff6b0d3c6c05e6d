"""A session in the formats other tools read: the conversation log (JSONL, and its mirror kept
current on disk), the runs tree and steps (trajectory), ATIF for Harbor, and OpenTelemetry spans
for the trace viewers."""
