# One time format on every screen (owlai.times): admin lists and forms write
# dates and times as ISO 8601 reads them, in the installation's time zone,
# which every admin page names. Input formats stay the language's own.
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
