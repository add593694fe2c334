"""Case builders, one module per spec; :mod:`.common` holds the byte layouts they share.

Nothing here imports zarrext: every stored object is built from the specs' byte
layouts with struct, numpy, zlib/gzip, numcodecs and google_crc32c, so a bug that
zarrext's encoder and decoder share cannot hide in the corpus.
"""
