"""The TFLite file format: the flatbuffer writer (the pipeline's ``export`` pass), op versions, custom-op options
as flexbuffers, debug metadata, and what TFLite Micro's op resolver and kernels take."""
