from os import *
