from kc_corpus_layer_base import Base


class Layer(Base):
    pass
