"""What an agent calls: the recorder (runs, calls, messages, state, delegation, with the request
committed before each call), the tailer (the last N events as context, then what is new, through
a consumer group), the filters a read picks events with, and both under asyncio."""
