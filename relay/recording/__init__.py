"""Recordings: the format, the writer, the reader, the one redactor, and the recorders the edges chain."""
