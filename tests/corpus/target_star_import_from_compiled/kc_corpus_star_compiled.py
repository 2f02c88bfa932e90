from sys import *
