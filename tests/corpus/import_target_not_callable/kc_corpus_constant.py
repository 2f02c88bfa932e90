rms_norm = 1.0
