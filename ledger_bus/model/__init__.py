"""The ground floor: errors, ids, the event vocabulary, canonical bytes, a prepared append,
artifacts, durability levels, the records a store returns, and JSON text in and out. It imports
nothing of the store, the features or the faces."""
