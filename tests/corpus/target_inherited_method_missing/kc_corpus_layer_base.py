class Base:
    def forward(self, x, weight):
        return x
