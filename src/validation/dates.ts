/**
 * Whether the calendar fields an ISO 8601 date-time starts with exist: month 1–12, the
 * day in its month (leap years counted), hour 0–23, minute and second 0–59. `Date.parse`
 * rolls `2030-02-30` over to 2 March and reads `T24:00` as the next day, so a format
 * check and `Date.parse` alone let a job be scheduled on a day nobody wrote.
 *
 * @example
 * calendarValid('2032-02-29T09:00:00Z'); // true
 * calendarValid('2030-02-30T09:00:00Z'); // false
 */
export function calendarValid(text: string): boolean {
  const m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d))?/.exec(text);
  if (!m) return false;
  // the seconds may be left out
  const [year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0] = m.slice(1).map((f) => Number(f ?? 0));
  // day 0 of the next month is the last day of this one
  const days = new Date(Date.UTC(year, month, 0)).getUTCDate();
  return month >= 1 && month <= 12 && day >= 1 && day <= days && hour <= 23 && minute <= 59 && second <= 59;
}
