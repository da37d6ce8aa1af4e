#pragma once
#define RADIUS 3
#define TAPS (2 * RADIUS + 1)
