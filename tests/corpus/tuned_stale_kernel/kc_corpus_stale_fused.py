def rms_norm(x, weight):
    return x  # edited since the table was measured: the digest the table records is of the text before
