/* Writes a 8x8 greyscale progressive JPEG of 528 scans (one coefficient per
   band, 11 successive-approximation passes each) from raw L on stdin. */
#include <stdio.h>
#include <jpeglib.h>
int main(void) {
  static unsigned char px[8 * 8];
  static jpeg_scan_info scans[528];
  if (fread(px, 1, sizeof px, stdin) != sizeof px) return 1;
  int n = 0;
  for (int k = 0; k < 48; k++) {
    scans[n].comps_in_scan = 1; scans[n].component_index[0] = 0;
    scans[n].Ss = k; scans[n].Se = k; scans[n].Ah = 0; scans[n].Al = 10; n++;
    for (int a = 9; a >= 0; a--) {
      scans[n].comps_in_scan = 1; scans[n].component_index[0] = 0;
      scans[n].Ss = k; scans[n].Se = k; scans[n].Ah = a + 1; scans[n].Al = a; n++;
    }
  }
  struct jpeg_compress_struct c; struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e); jpeg_create_compress(&c); jpeg_stdio_dest(&c, stdout);
  c.image_width = 8; c.image_height = 8; c.input_components = 1; c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c); jpeg_set_quality(&c, 100, TRUE);
  c.scan_info = scans; c.num_scans = n;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) { JSAMPROW r = px + c.next_scanline * 8; jpeg_write_scanlines(&c, &r, 1); }
  jpeg_finish_compress(&c); jpeg_destroy_compress(&c); return 0;
}
