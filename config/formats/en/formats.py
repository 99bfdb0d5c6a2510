# English dates as the portal shows them: day month year and a 24-hour clock ("3 Dec 2026, 22:15"), which
# reads the same in every English-speaking team; Chinese keeps Django's own (2026年12月3日 22:15).
DATETIME_FORMAT = "j M Y, H:i"
SHORT_DATETIME_FORMAT = "j M, H:i"
DATE_FORMAT = "j M Y"
TIME_FORMAT = "H:i"
