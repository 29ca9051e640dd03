"""Export: the flatbuffer writer, op versions, and custom-op options as flexbuffers."""
